"""The index face of the store: every Redis key and Lua script delayq uses."""
