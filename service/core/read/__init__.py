"""Reading the store: which stored version a key names, the part a read selects and its verified bytes, dataset
snapshots, and comparisons of two backends' features."""
