"""The watermark strategies, one module each (with its compiled kernel), and the registry that names them."""
