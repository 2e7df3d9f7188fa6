"""The commands: parse, call the layers below, print (results on stdout, notes on stderr)."""
