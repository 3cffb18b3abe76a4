import unittest

from __tpl_module__ import KEYWORDS, TokenizeError, count_kind, kinds, __tpl_tokenize__, __tpl_untokenize__

Q = '__tpl_quote__'


class TokenizeTest(unittest.TestCase):
    def test_numbers_and_ops(self):
        self.assertEqual(
            __tpl_tokenize__("12+3.5*x"),
            [("number", "12", 0), ("op", "+", 2), ("number", "3.5", 3), ("op", "*", 6), ("name", "x", 7)],
        )

    def test_names_and_keywords(self):
        self.assertEqual(sorted(KEYWORDS), __tpl_keywords__)
        for word in KEYWORDS:
            self.assertEqual(__tpl_tokenize__(word), [("keyword", word, 0)])
        keyword = sorted(KEYWORDS)[0]
        toks = __tpl_tokenize__(keyword + " _a1 b")
        self.assertEqual(kinds(toks), ["keyword", "name", "name"])
        self.assertEqual(toks[1], ("name", "_a1", len(keyword) + 1))
        self.assertEqual(toks[2][1], "b")

    def test_two_char_ops(self):
        toks = __tpl_tokenize__("a<=b!=c->d==e>=f")
        self.assertEqual([t[1] for t in toks if t[0] == "op"], ["<=", "!=", "->", "==", ">="])
        self.assertEqual(__tpl_tokenize__("a < b"), [("name", "a", 0), ("op", "<", 2), ("name", "b", 4)])

    def test_strings(self):
        toks = __tpl_tokenize__("x = " + Q + "hi there" + Q + " + y")
        self.assertEqual(toks[2], ("string", "hi there", 4))
        self.assertEqual(toks[3], ("op", "+", 15))
        self.assertEqual(__tpl_tokenize__(Q + Q), [("string", "", 0)])
        with self.assertRaises(TokenizeError):
            __tpl_tokenize__(Q + "open")

    def test_whitespace_and_comments(self):
        self.assertEqual(__tpl_tokenize__("  \t\n"), [])
        toks = __tpl_tokenize__("a __tpl_comment__ note + 1\nb")
        self.assertEqual(toks, [("name", "a", 0), ("name", "b", len("a __tpl_comment__ note + 1\n"))])
        self.assertEqual(__tpl_tokenize__("x __tpl_comment__ end"), [("name", "x", 0)])

    def test_bad_character(self):
        with self.assertRaises(TokenizeError):
            __tpl_tokenize__("a ? b")

    def test_untokenize(self):
        src = "f(a, 2) -> " + Q + "s" + Q
        self.assertEqual(__tpl_untokenize__(__tpl_tokenize__(src)), "f ( a , 2 ) -> " + Q + "s" + Q)
        self.assertEqual(__tpl_tokenize__(__tpl_untokenize__(__tpl_tokenize__(src)))[-1][:2], ("string", "s"))

    def test_count_kind(self):
        toks = __tpl_tokenize__("a + b * 3 - 4")
        self.assertEqual(count_kind(toks, "number"), 2)
        self.assertEqual(count_kind(toks, "op"), 3)
        self.assertEqual(count_kind(toks), count_kind(toks, "__tpl_countkind__"))
        self.assertEqual(count_kind(toks, "string"), 0)


if __name__ == "__main__":
    unittest.main()
