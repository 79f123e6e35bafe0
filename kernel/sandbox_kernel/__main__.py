from sandbox_kernel.cli.main import main

main()
