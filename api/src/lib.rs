//! The HelloStateful API: the custom resource, its defaults, the names and labels of its
//! children, the on-demand annotation keys, and the data mover's summaries. The plugin and
//! the reconciler both build on this crate and on nothing of each other.

pub mod defaults;
pub mod names;
mod resource;
pub mod summary;
pub mod validate;

pub use resource::*;
