from tailscope.cli.main import main

main()
