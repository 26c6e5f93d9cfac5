"""The project as a whole: the package's layers and shapes, its packaging, the README's
samples, the deploy files and contrib/."""
