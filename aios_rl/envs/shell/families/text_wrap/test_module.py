import unittest

from __tpl_module__ import DEFAULT_WIDTH, fill, indent, justify, __tpl_truncate__, __tpl_wrap__


class WrapTest(unittest.TestCase):
    def test_short_text_is_one_line(self):
        self.assertEqual(__tpl_wrap__("hello world", 20), ["hello world"])
        self.assertEqual(__tpl_wrap__("", 10), [])
        self.assertEqual(__tpl_wrap__("   ", 10), [])

    def test_breaks_between_words(self):
        self.assertEqual(__tpl_wrap__("aa bb cc dd", 5), ["aa bb", "cc dd"])
        self.assertEqual(__tpl_wrap__("aa bb cc dd", 4), ["aa", "bb", "cc", "dd"])
        self.assertEqual(__tpl_wrap__("one two three", 7), ["one two", "three"])

    def test_exact_width_fits(self):
        self.assertEqual(__tpl_wrap__("abc de", 6), ["abc de"])
        self.assertEqual(__tpl_wrap__("abc def", 6), ["abc", "def"])

    def test_long_words_are_split(self):
        self.assertEqual(__tpl_wrap__("abcdefgh", 3), ["abc", "def", "gh"])
        self.assertEqual(__tpl_wrap__("x abcdef y", 3), ["x", "abc", "def", "y"])
        self.assertEqual(__tpl_wrap__("abcdef", 3), ["abc", "def"])

    def test_bad_width(self):
        with self.assertRaises(ValueError):
            __tpl_wrap__("text", 0)
        self.assertEqual(__tpl_wrap__("ab", 1), ["a", "b"])

    def test_default_width(self):
        self.assertEqual(DEFAULT_WIDTH, __tpl_width__)
        text = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do"
        self.assertEqual(__tpl_wrap__(text), __tpl_wrap__(text, __tpl_width__))
        self.assertTrue(all(len(line) <= __tpl_width__ for line in __tpl_wrap__(text)))
        self.assertEqual(" ".join(__tpl_wrap__(text)), text)
        self.assertEqual(fill(text), "\n".join(__tpl_wrap__(text, __tpl_width__)))

    def test_fill(self):
        self.assertEqual(fill("aa bb cc", 5), "aa bb\ncc")

    def test_justify(self):
        self.assertEqual(justify("a b c", 7), "a  b  c")
        self.assertEqual(justify("a b c", 8), "a   b  c")
        self.assertEqual(justify("ab cd", 6), "ab  cd")
        self.assertEqual(justify("word", 6), "word  ")

    def test_truncate(self):
        self.assertEqual(__tpl_truncate__("short", 10), "short")
        self.assertEqual(__tpl_truncate__("exactly", 7), "exactly")
        self.assertEqual(__tpl_truncate__("abcdefghij", 6, suffix="~"), "abcde~")
        self.assertEqual(__tpl_truncate__("abcdefghij", 8), "abcdefghij"[: 8 - len("__tpl_suffix__")] + "__tpl_suffix__")
        self.assertEqual(len(__tpl_truncate__("abcdefghijkl", 9)), 9)

    def test_indent(self):
        self.assertEqual(indent("a\n\nb", "> "), "> a\n\n> b")
        self.assertEqual(indent("x"), "__tpl_prefix__" + "x")


if __name__ == "__main__":
    unittest.main()
