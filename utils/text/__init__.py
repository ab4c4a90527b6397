"""The Amharic text frontend: normalization, G2P, pronunciation dictionaries and tokenizers.

    from utils.text import normalize, phonemize, load_user_dict, save_user_dict
    normalize("በ፲፰፻፹፯ ዓ.ም").text      # -> words as spoken
    phonemize("ሰላም ነው።")              # -> ['s', 'ə', 'l', 'a', 'm', ' ', 'n', 'ə', 'w', '.']
"""
from utils.text.g2p import parse_phonemes, phonemes_string, phonemize, word_list_ipa, word_to_ipa
from utils.text.lexicon import load_user_dict, save_user_dict
from utils.text.normalize import Normalized, normalize

__all__ = ["Normalized", "normalize", "phonemize", "word_to_ipa", "word_list_ipa", "phonemes_string", "parse_phonemes",
           "load_user_dict", "save_user_dict"]
