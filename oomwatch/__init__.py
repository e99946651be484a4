"""oomwatch: why did my training job die of memory, and what do I change?"""

__version__ = "0.1.0"
