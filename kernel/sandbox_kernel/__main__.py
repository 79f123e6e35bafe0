from sandbox_kernel.cli import main

main()
