from memsif_lite.cli import main

if __name__ == "__main__":  # not when a worker process (memsif fleet --local) imports it again
    main()
