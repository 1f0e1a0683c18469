"""Role datasets: trace runs turned into one SFT dataset per role, their cards, and the hub upload."""
