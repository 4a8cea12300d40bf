"""Built-in passages for real attention data: openings of public-domain 19th-century books.

Each passage is long enough to fill 64 WordPiece positions (``[CLS]`` + at least 62
pieces + ``[SEP]``), so ``minilm_qk()`` with the default ``max_len=64`` returns 16
texts x 64 tokens with no padding. All the works were published before 1900 and are
in the public domain.

:func:`long_passages` joins them into long texts for long-context studies: text ``i``
is all 16 passages, starting with passage ``i`` and wrapping around, separated by a blank
line (at least 1,445 SmolLM2 tokens and 1,419 WordPiece positions each, so every text fills
1,024 decoder positions and the encoder's 512).
"""

from __future__ import annotations

from typing import NamedTuple

from .._params import check_int

__all__ = ["Passage", "PASSAGE_SOURCES", "PASSAGES", "LONG_PASSAGES", "long_passages"]


class Passage(NamedTuple):
    title: str
    author: str
    year: int
    text: str


PASSAGE_SOURCES: tuple[Passage, ...] = (
    Passage(
        "Pride and Prejudice",
        "Jane Austen",
        1813,
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
        "must be in want of a wife. However little known the feelings or views of such a man may be "
        "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
        "surrounding families, that he is considered the rightful property of some one or other of "
        "their daughters.",
    ),
    Passage(
        "A Tale of Two Cities",
        "Charles Dickens",
        1859,
        "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
        "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
        "season of Light, it was the season of Darkness, it was the spring of hope, it was the "
        "winter of despair, we had everything before us, we had nothing before us, we were all going "
        "direct to Heaven, we were all going direct the other way.",
    ),
    Passage(
        "Moby-Dick",
        "Herman Melville",
        1851,
        "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little or no "
        "money in my purse, and nothing particular to interest me on shore, I thought I would sail "
        "about a little and see the watery part of the world. It is a way I have of driving off the "
        "spleen and regulating the circulation. Whenever I find myself growing grim about the "
        "mouth, I account it high time to get to sea as soon as I can.",
    ),
    Passage(
        "Frankenstein",
        "Mary Shelley",
        1818,
        "You will rejoice to hear that no disaster has accompanied the commencement of an "
        "enterprise which you have regarded with such evil forebodings. I arrived here yesterday, "
        "and my first task is to assure my dear sister of my welfare and increasing confidence in "
        "the success of my undertaking. I am already far north of London, and as I walk in the "
        "streets of Petersburgh, I feel a cold northern breeze play upon my cheeks.",
    ),
    Passage(
        "Jane Eyre",
        "Charlotte Bront\u00eb",
        1847,
        "There was no possibility of taking a walk that day. We had been wandering, indeed, in the "
        "leafless shrubbery an hour in the morning; but since dinner (Mrs. Reed, when there was no "
        "company, dined early) the cold winter wind had brought with it clouds so sombre, and a rain "
        "so penetrating, that further out-door exercise was now out of the question.",
    ),
    Passage(
        "Alice's Adventures in Wonderland",
        "Lewis Carroll",
        1865,
        "Alice was beginning to get very tired of sitting by her sister on the bank, and of having "
        "nothing to do: once or twice she had peeped into the book her sister was reading, but it "
        "had no pictures or conversations in it, \u2018and what is the use of a book,\u2019 thought "
        "Alice \u2018without pictures or conversations?\u2019 So she was considering in her own mind "
        "whether the pleasure of making a daisy-chain would be worth the trouble of getting up.",
    ),
    Passage(
        "Great Expectations",
        "Charles Dickens",
        1861,
        "My father's family name being Pirrip, and my Christian name Philip, my infant tongue could "
        "make of both names nothing longer or more explicit than Pip. So, I called myself Pip, and "
        "came to be called Pip. I give Pirrip as my father's family name, on the authority of his "
        "tombstone and my sister,\u2014Mrs. Joe Gargery, who married the blacksmith.",
    ),
    Passage(
        "Emma",
        "Jane Austen",
        1815,
        "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, "
        "seemed to unite some of the best blessings of existence; and had lived nearly twenty-one "
        "years in the world with very little to distress or vex her. She was the youngest of the two "
        "daughters of a most affectionate, indulgent father; and had, in consequence of her "
        "sister's marriage, been mistress of his house from a very early period.",
    ),
    Passage(
        "Walden",
        "Henry David Thoreau",
        1854,
        "When I wrote the following pages, or rather the bulk of them, I lived alone, in the woods, "
        "a mile from any neighbor, in a house which I had built myself, on the shore of Walden Pond, "
        "in Concord, Massachusetts, and earned my living by the labor of my hands only. I lived "
        "there two years and two months. At present I am a sojourner in civilized life again.",
    ),
    Passage(
        "On the Origin of Species",
        "Charles Darwin",
        1859,
        "When on board H.M.S. 'Beagle,' as naturalist, I was much struck with certain facts in the "
        "distribution of the inhabitants of South America, and in the geological relations of the "
        "present to the past inhabitants of that continent. These facts seemed to me to throw some "
        "light on the origin of species\u2014that mystery of mysteries, as it has been called by one "
        "of our greatest philosophers.",
    ),
    Passage(
        "Adventures of Huckleberry Finn",
        "Mark Twain",
        1884,
        "You don't know about me without you have read a book by the name of The Adventures of Tom "
        "Sawyer; but that ain't no matter. That book was made by Mr. Mark Twain, and he told the "
        "truth, mainly. There was things which he stretched, but mainly he told the truth. That is "
        "nothing. I never seen anybody but lied one time or another, without it was Aunt Polly, or "
        "the widow, or maybe Mary.",
    ),
    Passage(
        "Treasure Island",
        "Robert Louis Stevenson",
        1883,
        "Squire Trelawney, Dr. Livesey, and the rest of these gentlemen having asked me to write "
        "down the whole particulars about Treasure Island, from the beginning to the end, keeping "
        "nothing back but the bearings of the island, and that only because there is still "
        "treasure not yet lifted, I take up my pen in the year of grace 17\u2014, and go back to the "
        "time when my father kept the Admiral Benbow inn.",
    ),
    Passage(
        "Dracula",
        "Bram Stoker",
        1897,
        "3 May. Bistritz.\u2014Left Munich at 8:35 P. M., on 1st May, arriving at Vienna early next "
        "morning; should have arrived at 6:46, but train was an hour late. Buda-Pesth seems a "
        "wonderful place, from the glimpse which I got of it from the train and the little I could "
        "walk through the streets. I feared to go very far from the station, as we had arrived late "
        "and would start as near the correct time as possible.",
    ),
    Passage(
        "Wuthering Heights",
        "Emily Bront\u00eb",
        1847,
        "1801.\u2014I have just returned from a visit to my landlord\u2014the solitary neighbour "
        "that I shall be troubled with. This is certainly a beautiful country! In all England, I do "
        "not believe that I could have fixed on a situation so completely removed from the stir of "
        "society. A perfect misanthropist's heaven: and Mr. Heathcliff and I are such a suitable "
        "pair to divide the desolation between us.",
    ),
    Passage(
        "A Scandal in Bohemia",
        "Arthur Conan Doyle",
        1891,
        "To Sherlock Holmes she is always the woman. I have seldom heard him mention her under any "
        "other name. In his eyes she eclipses and predominates the whole of her sex. It was not "
        "that he felt any emotion akin to love for Irene Adler. All emotions, and that one "
        "particularly, were abhorrent to his cold, precise but admirably balanced mind.",
    ),
    Passage(
        "The Tell-Tale Heart",
        "Edgar Allan Poe",
        1843,
        "True!\u2014nervous\u2014very, very dreadfully nervous I had been and am; but why will you "
        "say that I am mad? The disease had sharpened my senses\u2014not destroyed\u2014not dulled "
        "them. Above all was the sense of hearing acute. I heard all things in the heaven and in the "
        "earth. I heard many things in hell. How, then, am I mad? Hearken! and observe how "
        "healthily\u2014how calmly I can tell you the whole story.",
    ),
)

#: The texts of :data:`PASSAGE_SOURCES`, in order (the default ``texts`` of ``minilm_qk``).
PASSAGES: tuple[str, ...] = tuple(p.text for p in PASSAGE_SOURCES)


#: The separator :func:`long_passages` puts between passages (a blank line).
LONG_SEPARATOR = "\n\n"


def long_passages(n_texts: int = 16) -> tuple[str, ...]:
    """Long texts made of the built-in passages: text ``i`` joins all of them, starting at passage ``i``.

    Text ``i`` is ``PASSAGES[i], PASSAGES[i + 1], ..., PASSAGES[i + 15]`` (indices mod 16)
    joined by a blank line (``"\\n\\n"``): a deterministic rotation, so each text opens with a
    different passage (its first tokens, the "attention sinks", differ) and every text holds all
    16 passages, at least 1,445 SmolLM2 tokens (1,419 WordPiece positions). Truncated by the loaders'
    ``max_len``, each fills 1,024 decoder positions (:func:`~rfkit.data.smollm2_qk`) and the 512
    of the encoder (:func:`~rfkit.data.minilm_qk`) without padding.

    Parameters
    ----------
    n_texts : int in [1, 16], default=16
        How many texts (the first ``n_texts`` rotations).

    Returns
    -------
    tuple of str
        The texts.

    Examples
    --------
    >>> from rfkit.data import PASSAGES, long_passages
    >>> texts = long_passages(2)
    >>> texts[1].startswith(PASSAGES[1]) and texts[1].endswith(PASSAGES[0])
    True
    """
    k = len(PASSAGES)
    n_texts = check_int(n_texts, "n_texts", "long_passages", low=1, high=k)
    return tuple(LONG_SEPARATOR.join(PASSAGES[(i + j) % k] for j in range(k)) for i in range(n_texts))


#: :func:`long_passages` with all 16 texts.
LONG_PASSAGES: tuple[str, ...] = long_passages()
