"""The ground floor: the run directory's contract, the Kineto vocabulary, trace discovery, capture-cost records and errors. Imports nothing of workbench above it."""
