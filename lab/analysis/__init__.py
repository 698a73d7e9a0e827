"""Evidence about the methods, not the methods themselves: evaluation statistics (avg@k, pass@k, bootstrap
confidence intervals), the Theorem A.2 simulation and the gradient-variance probe."""
