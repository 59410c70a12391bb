from gpusolve.serve.client import main

main()
