from memsif_lite.cli import main

main()
