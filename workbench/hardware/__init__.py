"""The ground floor: devices (peaks per dtype, memory) and the systems they come in (links). Imports nothing of workbench above it."""
