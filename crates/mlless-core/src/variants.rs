//! [`assert_all_in_place!`](crate::assert_all_in_place): the check that keeps a hand-written
//! `ALL` list of an enum's variants complete and in order.
//!
//! An enum with an `ALL: [Self; N]` list also has a `const fn index(self) -> usize`, an
//! exhaustive `match` giving each variant its place in `ALL`, and this assertion below them. A
//! new variant then does not compile until it has a place in `index`, and the build fails
//! until `ALL` lists the variants in that order. (What the compiler cannot see is a variant
//! given the next place but left out of `ALL` entirely; where the enum is also a `clap`
//! `ValueEnum`, whose derived `value_variants` lists every variant, the CLI's tests compare the
//! two.)

/// Asserts at compile time that `T::ALL[i].index() == i` for every `i` of the enum `T`'s `ALL`
/// (see the [module docs](crate::variants)).
#[macro_export]
macro_rules! assert_all_in_place {
    ($ty:ty) => {
        const _: () = {
            let all = <$ty>::ALL;
            let mut i = 0;
            while i < all.len() {
                assert!(
                    all[i].index() == i,
                    concat!(stringify!($ty), "::ALL is not every variant at its index()")
                );
                i += 1;
            }
        };
    };
}
