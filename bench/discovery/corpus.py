"""bench/discovery/corpus.py -- a deterministic synthetic agent registry.

Agents describe themselves the way IoA agents do: a short sentence of skill
words, glue words (stopwords the tokenizer drops) and a few tags.  The skill
vocabulary is a few thousand made-up words drawn with a Zipf law (exponent
`s`, rank r has weight 1 / r^s), so a handful of words are in a large part
of all descriptions (the hard case for discovery: long posting lists) and
most are rare.  Queries are capability phrases drawn from the same law.

Used by bench/discovery/client.py (registration and queries); the same
seeds give the same corpus on every run.
"""

import bisect
import random

SYLLABLES = ("ka ri to mu sen la vo dre pi nax qua zel bo tri fen gor li "
             "sha mon dac ver ul pra ti es on").split()
GLUE = ("and with for the of to in a an that can my your our it by on "
        "from into about").split()
# a few real words, so plural folding and short words are exercised too
REAL = ("python kotlin translation french legal documents images crop "
        "rotate weather forecasts recipes baking sql queries apis cloud "
        "security audits invoices taxes music mixing video editing maps "
        "routes drones sensors robots charts statistics").split()


def vocabulary(size, seed):
    rnd = random.Random(seed)
    words, seen = list(REAL), set(REAL)
    while len(words) < size:
        w = "".join(rnd.choice(SYLLABLES) for _ in range(rnd.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    rnd.shuffle(words)
    return words


class Zipf:
    def __init__(self, words, s):
        self.words = words
        acc, self.cum = 0.0, []
        for r in range(1, len(words) + 1):
            acc += 1.0 / r ** s
            self.cum.append(acc)

    def draw(self, rnd):
        return self.words[bisect.bisect(self.cum, rnd.random() * self.cum[-1])]


def agents(n, vocab=3000, s=1.0, seed=1):
    """Yields (name, type, desc, tags) for n agents."""
    rnd = random.Random(seed)
    z = Zipf(vocabulary(vocab, seed), s)
    for i in range(n):
        skills = [z.draw(rnd) for _ in range(rnd.randint(5, 10))]
        desc = []
        for w in skills:
            if rnd.random() < 0.3:
                desc.append(rnd.choice(GLUE))
            desc.append(w)
        tags = rnd.sample(skills, rnd.randint(0, min(3, len(skills))))
        yield ("agent%06d" % i,
               "Human Assistant" if rnd.random() < 0.3 else "Thing Assistant",
               " ".join(desc).capitalize() + ".", tags)


def queries(n, vocab=3000, s=1.0, seed=2, lengths=(1, 2, 2, 3, 3, 4)):
    """Yields capability phrases of skill words, as many as a draw from
    `lengths` (IoA's LLM writes short phrases such as "translate legal
    documents into French")."""
    rnd = random.Random(seed)
    z = Zipf(vocabulary(vocab, 1), s)
    for _ in range(n):
        words = [z.draw(rnd) for _ in range(rnd.choice(lengths))]
        if rnd.random() < 0.5:
            words.insert(rnd.randrange(len(words) + 1), rnd.choice(GLUE))
        yield " ".join(words)
