"""What the tests share: private servers (Redis, MariaDB, Galera, Sentinel, Cluster,
HAProxy), network namespaces, running the command line, waiting on conditions."""
