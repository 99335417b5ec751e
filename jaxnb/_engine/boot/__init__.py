"""What an engine (or the controller) does as it starts: entry points and safety nets."""
