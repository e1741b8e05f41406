//! `arith`: integer reasoning about index expressions.
//!
//! - [`Bounds`]: inclusive intervals of loop variables, and interval
//!   arithmetic over expressions ([`Bounds::interval`]).
//! - [`simplify`]: constant folding, affine canonical form (`Σ cᵢ·tᵢ + k`),
//!   floordiv/floormod rules, and conditions decided by bounds — what loop
//!   splitting and buffer flattening need to produce clean indices and to
//!   drop tail checks that can never fail.
//! - [`linear`]: an expression as `c·v + rest` in one variable.

mod bounds;
mod linear;
mod simplify;

pub use bounds::{Bounds, Interval};
pub use linear::linear;
pub use simplify::{simplify, simplify_stmt};
