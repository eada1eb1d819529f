"""What is derived from results: comparisons, traces and statistics (never printed here)."""
