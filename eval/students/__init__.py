"""`eval students`: which student to train on a strong teacher's chains, each trained to convergence."""
