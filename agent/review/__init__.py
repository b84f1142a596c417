"""Reading results back: load a results folder once, then show it in the terminal or as one HTML page."""
