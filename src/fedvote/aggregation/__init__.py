"""Vote histograms, noise shares, and the noisy argmax."""

from fedvote.aggregation.voting import noise_share_std, noisy_argmax, one_hot_votes, top_two_gap

__all__ = ["noise_share_std", "noisy_argmax", "one_hot_votes", "top_two_gap"]
