"""The command line: one command group, its commands, and the files a command writes."""
