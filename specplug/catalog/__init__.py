"""Model, drafter and GPU catalogs: facts in data/*.csv (each row with its sources), loaded on demand.

Names resolve through aliases, Hugging Face ids (case-insensitive) and, for models, local folders; an
unknown name raises CatalogError with "did you mean" suggestions.
"""

from specplug.catalog.drafters import Drafter, drafters, drafters_for
from specplug.catalog.gpus import GPU, get_gpu, gpus, match_nvml_name
from specplug.catalog.models import Model, get_model, models, search_models

__all__ = [
    "GPU",
    "Drafter",
    "Model",
    "drafters",
    "drafters_for",
    "get_gpu",
    "get_model",
    "gpus",
    "match_nvml_name",
    "models",
    "search_models",
]
