from oomwatch.cli import main

main()
