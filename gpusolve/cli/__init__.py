"""The command line: the `gpusolve` group (group.py), one module per command, what the commands share
(common.py) and the files a solve writes (outputs.py); entry.py is the program, which tries a server first."""
