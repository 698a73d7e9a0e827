"""Evidence about the methods, not the methods themselves: the CPU toy loop and its experiments (ablations, learning
curves, break-even, learning-rate choice), their reports, the Theorem A.2 simulation and the gradient-variance
probe. The statistics they share with evaluation are ``evaluation.stats``."""
