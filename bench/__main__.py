from rhtc.bench.cli import main

main()
