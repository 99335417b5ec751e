"""Code that runs inside the engines (never imports IPython at module level)."""
