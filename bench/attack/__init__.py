"""A standing attack suite (not the test suite): bounded scripts that try to break the
store's guarantees on a real server and print a table of what they tried, what held and
anything lost. Run each as ``python -m bench.attack.<name> [--url URL] [--seconds N]``."""
