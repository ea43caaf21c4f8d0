//! Names of inserted nodes, chosen exactly as `torch.fx.Graph` chooses them
//! (`_Namespace.create_name` on the snake-cased callable name), so that the
//! command line tool's rewritten graph prints like the live graph the pass
//! rewrites (`tests/test_appliers_agree.py` compares them on real graphs).

use std::collections::{HashMap, HashSet};

use crate::ir::Graph;

/// Python keywords, builtins and FX's custom builtins: never node names.
const ILLEGAL_NAMES: &[&str] = &[
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
    "__build_class__",
    "__debug__",
    "__doc__",
    "__import__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "inf",
    "nan",
    "NoneType",
    "torch",
    "device",
    "fx_pytree",
    "pytree",
];

/// `torch.fx.graph._snake_case`: an underscore before each capital that
/// follows a lower-case letter, then lower case.
pub(super) fn snake_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let mut prev_lower = false;
    for c in s.chars() {
        if prev_lower && c.is_ascii_uppercase() {
            out.push('_');
        }
        prev_lower = c.is_ascii_lowercase();
        out.extend(c.to_lowercase());
    }
    out
}

/// `name_N` -> (`name`, N), as FX's `(.*)_(\d+)$`.
fn split_suffix(name: &str) -> Option<(&str, u64)> {
    let (base, digits) = name.rsplit_once('_')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, digits.parse().ok()?))
}

/// The name allocator of an FX graph (`torch.fx.graph._Namespace`),
/// reconstructed from the names already in the graph.
pub(super) struct Namer {
    used: HashSet<String>,
    base_count: HashMap<String, u64>,
}

impl Namer {
    pub(super) fn new(graph: &Graph) -> Self {
        let mut used = HashSet::new();
        let mut base_count: HashMap<String, u64> = HashMap::new();
        for node in &graph.nodes {
            let (base, num) = split_suffix(&node.name).unwrap_or((&node.name, 0));
            let c = base_count.entry(base.to_string()).or_insert(0);
            *c = (*c).max(num);
            used.insert(node.name.clone());
        }
        Self { used, base_count }
    }

    fn taken(&self, name: &str) -> bool {
        self.used.contains(name) || ILLEGAL_NAMES.contains(&name)
    }

    /// `_Namespace.create_name(candidate, None)`.
    pub(super) fn create(&mut self, candidate: &str) -> String {
        let mut clean = String::with_capacity(candidate.len());
        let mut in_illegal = false;
        for c in candidate.chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                clean.push(c);
                in_illegal = false;
            } else if !in_illegal {
                clean.push('_');
                in_illegal = true;
            }
        }
        if clean.is_empty() {
            clean = "_unnamed".into();
        }
        if clean.starts_with(|c: char| c.is_ascii_digit()) {
            clean.insert(0, '_');
        }
        let (base, num) = match split_suffix(&clean) {
            Some((b, n)) => (b.to_string(), Some(n)),
            None => (clean.clone(), None),
        };
        let mut name = match num {
            Some(n) => format!("{base}_{n}"),
            None => base.clone(),
        };
        let mut num = match num {
            Some(n) if n != 0 => n,
            _ => self.base_count.get(&base).copied().unwrap_or(0),
        };
        while self.taken(&name) {
            num += 1;
            name = format!("{base}_{num}");
        }
        self.used.insert(name.clone());
        self.base_count.insert(base, num);
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Node, OpCode, Target, TargetKind};

    #[test]
    fn names_follow_fx() {
        assert_eq!(snake_case("clone.default"), "clone.default");
        assert_eq!(snake_case("slice.Tensor"), "slice.tensor");
        assert_eq!(snake_case("div.Tensor_mode"), "div.tensor_mode");
        assert_eq!(snake_case("fooBar.default"), "foo_bar.default");
        let mut g = Graph::new();
        let t = g.add_target(Target {
            name: "x".into(),
            kind: TargetKind::Other,
            schema: None,
        });
        for name in ["getitem", "getitem_1", "getitem_6", "clone_default"] {
            g.add_node(Node {
                op: OpCode::Placeholder,
                name: name.into(),
                target: t,
                args: vec![],
                kwargs: vec![],
                meta: None,
                source: None,
            });
        }
        let mut namer = Namer::new(&g);
        assert_eq!(namer.create("getitem"), "getitem_7");
        assert_eq!(namer.create("getitem"), "getitem_8");
        assert_eq!(namer.create("clone.default"), "clone_default_1");
        assert_eq!(namer.create("copy_.default"), "copy__default");
        assert_eq!(namer.create("slice.tensor"), "slice_tensor");
        assert_eq!(namer.create("slice"), "slice_1");
        assert_eq!(namer.create("x_007"), "x_7");
        assert_eq!(namer.create("9lives"), "_9lives");
        assert_eq!(namer.create(""), "_unnamed");
    }
}
