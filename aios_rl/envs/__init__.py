"""The environments: each samples tasks, runs episodes and reports evidence."""
