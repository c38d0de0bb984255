"""Unit tests of the mutation operators (CTest: mutation_operators). The lexer must mutate
arithmetic, comparisons and constants in code, and leave alone what a mutation cannot meaningfully
change: comments, string concatenation, template brackets, pointer declarations, error messages."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import candidates_for  # noqa: E402


def changes(code: str):
    return [(c.operator, c.original, c.replacement) for c in candidates_for("x.cpp", code)]


class MutationOperators(unittest.TestCase):
    def test_arithmetic_and_comparison_in_code(self):
        got = changes("int f(int a, int b) { return a - b < 3 ? a * b : a / b; }\n")
        self.assertIn(("arithmetic", "-", "+"), got)
        self.assertIn(("comparison", "<", "<="), got)
        self.assertIn(("arithmetic", "*", "/"), got)
        self.assertIn(("constant", "3", "4"), got)

    def test_comments_and_preprocessor_are_not_code(self):
        self.assertEqual(changes("// a - b\n/* 1 + 2 */\n#define X (1 + 2)\n"), [])

    def test_string_concatenation_is_not_arithmetic(self):
        got = changes('std::string s = "layer " + std::to_string(i);\n')
        self.assertNotIn(("arithmetic", "+", "-"), got)

    def test_template_brackets_and_pointers_are_not_operators(self):
        got = changes("std::vector<int> v; const float* p = nullptr; static_cast<double>(x);\n")
        self.assertEqual([c for c in got if c[0] in ("comparison", "arithmetic")], [])

    def test_error_messages_are_left_alone(self):
        self.assertEqual(changes('TORCH_CHECK(n > 0, "need 1 + n");\nthrow Error("x" + 1);\n'),
                         [("comparison", ">", ">="), ("constant", "0", "1")])

    def test_float_constants_unary_minus_and_negation(self):
        got = changes("double y = -x * 0.5; bool ok = !done;\n")
        self.assertIn(("unary_minus", "-", ""), got)
        self.assertIn(("float_constant", "0.5", "1.0"), got)
        self.assertIn(("negation", "!", ""), got)

    def test_apply_changes_one_token(self):
        code = "int g(int a) { return a + 1; }\n"
        c = next(c for c in candidates_for("x.cpp", code) if c.operator == "arithmetic")
        self.assertEqual(c.apply(code), "int g(int a) { return a - 1; }\n")


if __name__ == "__main__":
    unittest.main()
