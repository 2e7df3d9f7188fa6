"""From a path to the analysed run: locate, reduce (per rank, in workers), the summary and result caches, the verdict; and compare."""
