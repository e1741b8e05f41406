//! Relay, the graph-level IR: expressions, types, operators, traversal,
//! text format, type inference and the reference interpreter.

pub mod expr;
pub mod infer;
pub mod interp;
pub mod lexer;
pub mod module;
pub mod op;
pub mod parser;
pub mod printer;
pub mod structural;
pub mod ty;
pub mod value;
pub mod visit;

pub use expr::{Call, Callee, ConstId, Expr, ExprId, ExprKind, Function, Store, Var};
pub use infer::{infer_expr, infer_module};
pub use interp::{eval_expr, eval_function};
pub use module::IRModule;
pub use op::{op_registry, OpDef, OpId, OpMap, OpPattern};
pub use parser::{parse_module, parse_module_file, TEXT_VERSION};
pub use printer::{print_expr, print_module, print_module_structure};
pub use structural::{structural_eq, structural_hash};
pub use ty::{FuncType, TensorType, Type, TypeId};
pub use value::Value;
pub use visit::{mutate, post_order, visit, ExprMutator, ExprVisitor, Rewrites};
