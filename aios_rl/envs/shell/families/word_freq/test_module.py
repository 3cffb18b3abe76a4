import unittest

from __tpl_module__ import MIN_LENGTH, STOPWORDS, capitalized_ratio, __tpl_count__, longest, __tpl_normalize__, top_words

TEXT = "The cat sat. The cat ran! A dog ran, and the DOG sat (quietly)."


class WordsTest(unittest.TestCase):
    def test_normalize(self):
        self.assertEqual(__tpl_normalize__("Hello,"), "hello")
        self.assertEqual(__tpl_normalize__("(quietly)."), "quietly")
        self.assertEqual(__tpl_normalize__('"Quoted!"'), "quoted")
        self.assertEqual(__tpl_normalize__("it's"), "it's")

    def test_count(self):
        counts = __tpl_count__(TEXT, skip_stopwords=False)
        self.assertEqual(counts["cat"], 2)
        self.assertEqual(counts["dog"], 2)
        self.assertEqual(counts["ran"], 2)
        self.assertEqual(counts["quietly"], 1)
        self.assertEqual(counts.get("the", 0), 3 if MIN_LENGTH <= 3 else 0)

    def test_stopwords_skipped_by_default(self):
        self.assertEqual(sorted(STOPWORDS), __tpl_stopwords__)
        counts = __tpl_count__(TEXT)
        for word in STOPWORDS:
            self.assertNotIn(word, counts)
        self.assertEqual(counts["cat"], 2)

    def test_min_length(self):
        self.assertEqual(MIN_LENGTH, __tpl_minlen__)
        counts = __tpl_count__("a bb ccc dddd", skip_stopwords=False)
        self.assertEqual(sorted(counts), [w for w in ["a", "bb", "ccc", "dddd"] if len(w) >= MIN_LENGTH])

    def test_top_words(self):
        self.assertEqual(top_words(TEXT, 2), [("cat", 2), ("dog", 2)])
        self.assertEqual(top_words(TEXT, 1), [("cat", 2)])
        self.assertEqual(len(top_words("alpha bravo charlie delta echo foxtrot golf hotel")), __tpl_topn__)
        self.assertEqual(top_words(""), [])

    def test_longest(self):
        self.assertEqual(longest(TEXT), "quietly")
        self.assertEqual(longest("bb aa cc"), "aa")
        self.assertEqual(longest(""), "")

    def test_capitalized_ratio(self):
        self.assertEqual(capitalized_ratio("Hello world Foo bar"), 0.5)
        self.assertEqual(capitalized_ratio(""), 0.0)
        self.assertEqual(capitalized_ratio("A B C"), 1.0)


if __name__ == "__main__":
    unittest.main()
