"""What a person reads: figures, the text summary, the HTML report."""
