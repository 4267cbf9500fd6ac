"""mutransfer: hyperparameter transfer (muTransfer-FNO) for neural operators."""

__version__ = "0.1.0"
