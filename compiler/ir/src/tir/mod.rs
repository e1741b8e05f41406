//! TIR, the loop-level IR: `PrimFunc`s of loops, stores and loads over buffers.

pub mod expr;
pub mod flops;
pub mod parser;
pub mod printer;
pub mod stmt;
pub mod transform;
pub mod verify;

pub use expr::{BinOp, Buffer, CmpOp, Combiner, Expr, Intrinsic, Reduce, Scope, TirType, Var};
pub use flops::float_ops;
pub use parser::{parse_expr, parse_prim_func, parse_stmt};
pub use printer::{print_expr, print_prim_func, print_stmt};
pub use stmt::{For, ForKind, PrimFunc, Stmt, ThreadAxis};
pub use verify::{verify_prim_func, IllFormed};
