"""`eval compare`: every system of a config on one test split, its metrics, paired differences and report."""
