"""Running the user's code on the engines: train functions and their reports, cell values."""
