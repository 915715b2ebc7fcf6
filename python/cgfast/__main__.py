from cgfast._cli import main

main()
