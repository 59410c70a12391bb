from gpusolve.cli.entry import main

main()
