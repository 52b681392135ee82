"""The pure core: no I/O, no event loop, no logging. Time is a callable or an argument."""
