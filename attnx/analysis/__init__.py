"""What is derived from results without recomputing them: traces, and later diffs and head statistics."""
