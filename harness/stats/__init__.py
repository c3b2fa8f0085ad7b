"""Statistics of repeated measurements (no perfdag imports): how sure a number is, and whether two
sets of numbers differ by more than their noise. noise.py is the model every verdict uses."""
