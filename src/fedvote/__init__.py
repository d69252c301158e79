"""fedvote: differentially private federated learning by noisy voting.

Agents train local teachers on their private data and release only noisy votes on
public queries; the noisy argmax becomes a pseudo-label for a global student. Every
release is accounted at agent and instance level (see ``docs/privacy.md``).
"""

__version__ = "0.1.0"
