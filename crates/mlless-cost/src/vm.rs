//! Prices of VM types for the IaaS comparison (LambdaML's model of renting machines instead).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::CostError;

/// The shortest time a VM is billed for, in seconds (per-second billing with a one-minute
/// minimum, as EC2 bills Linux on-demand instances).
pub const VM_MINIMUM_BILLED_S: f64 = 60.0;

/// Default time for rented VMs to boot and start the job, in seconds: the order of a minute an
/// on-demand instance takes from the request to a running job. A run does not measure it; the
/// CLI lets the user change it (0 for VMs that are already up).
pub const DEFAULT_VM_STARTUP_S: f64 = 60.0;

/// The hourly price of one VM type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmPrice {
    /// Type name, e.g. `c5.large`.
    pub name: String,
    /// On-demand price of one machine, US dollars per hour.
    pub usd_per_hour: f64,
}

impl VmPrice {
    /// A VM type of `name` at `usd_per_hour`.
    pub fn new(name: impl Into<String>, usd_per_hour: f64) -> Self {
        Self {
            name: name.into(),
            usd_per_hour,
        }
    }

    /// Built-in VM types: AWS EC2 on-demand Linux list prices in us-east-1 (N. Virginia), from
    /// the EC2 on-demand pricing page: t3.medium (2 vCPU, 4 GiB) $0.0416/h, c5.large (2 vCPU,
    /// 4 GiB) $0.085/h, c5.4xlarge (16 vCPU, 32 GiB) $0.68/h. LambdaML compared against c5
    /// instances.
    pub fn builtins() -> Vec<VmPrice> {
        vec![
            Self::new("t3.medium", 0.0416),
            Self::new("c5.large", 0.085),
            Self::new("c5.4xlarge", 0.68),
        ]
    }

    /// The built-in VM type of that name, if there is one.
    pub fn by_name(name: &str) -> Option<VmPrice> {
        Self::builtins().into_iter().find(|vm| vm.name == name)
    }

    /// What `machines` of this type cost for `seconds` each: billed per second, rounded up, with
    /// a minimum of [`VM_MINIMUM_BILLED_S`] per machine.
    pub fn usd_for(&self, machines: u32, seconds: f64) -> f64 {
        billed_vm_seconds(seconds) * f64::from(machines) * self.usd_per_hour / 3600.0
    }
}

/// Seconds a VM that ran `seconds` is billed for: rounded up to a whole second, at least
/// [`VM_MINIMUM_BILLED_S`].
pub fn billed_vm_seconds(seconds: f64) -> f64 {
    let s = if seconds.is_finite() { seconds } else { 0.0 };
    s.max(0.0).ceil().max(VM_MINIMUM_BILLED_S)
}

/// `TYPE:PRICE` (dollars per hour, e.g. `m5.xlarge:0.192`) or the name of a built-in type
/// (`c5.large`).
impl FromStr for VmPrice {
    type Err = CostError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| CostError::InvalidVm {
            input: s.to_string(),
            reason,
        };
        let s = s.trim();
        let Some((name, price)) = s.rsplit_once(':') else {
            return Self::by_name(s).ok_or_else(|| {
                let known: Vec<String> = Self::builtins().into_iter().map(|v| v.name).collect();
                bad(format!(
                    "expected TYPE:PRICE (dollars per hour), or one of {}",
                    known.join(", ")
                ))
            });
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("the VM type is empty".into()));
        }
        let usd_per_hour: f64 = price
            .trim()
            .parse()
            .map_err(|_| bad(format!("{price:?} is not a price in dollars per hour")))?;
        if !(usd_per_hour.is_finite() && usd_per_hour >= 0.0) {
            return Err(bad("the price must be a finite number, 0 or more".into()));
        }
        Ok(Self::new(name, usd_per_hour))
    }
}

impl fmt::Display for VmPrice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.usd_per_hour)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_type_and_price_or_a_builtin() {
        let vm: VmPrice = "m5.xlarge:0.192".parse().unwrap();
        assert_eq!(vm, VmPrice::new("m5.xlarge", 0.192));
        assert_eq!(vm.to_string().parse::<VmPrice>().unwrap(), vm);
        let builtin: VmPrice = "c5.large".parse().unwrap();
        assert_eq!(builtin.usd_per_hour, 0.085);
        for bad in ["", "m5:", ":0.1", "m5:cheap", "m5:-1", "m5:inf", "z9.huge"] {
            let err = bad.parse::<VmPrice>().unwrap_err().to_string();
            assert!(err.starts_with("invalid VM price"), "{bad}: {err}");
        }
        assert!(
            "z9.huge"
                .parse::<VmPrice>()
                .unwrap_err()
                .to_string()
                .contains("t3.medium")
        );
    }

    #[test]
    fn vm_billing_is_per_second_with_a_one_minute_minimum() {
        let vm = VmPrice::new("x", 3.6); // $0.001 per second
        assert!((vm.usd_for(1, 1.0) - 0.06).abs() < 1e-12);
        assert!((vm.usd_for(1, 59.2) - 0.06).abs() < 1e-12);
        assert!((vm.usd_for(1, 60.0) - 0.06).abs() < 1e-12);
        assert!((vm.usd_for(1, 60.2) - 0.061).abs() < 1e-12);
        assert!((vm.usd_for(4, 120.0) - 0.48).abs() < 1e-12);
        assert_eq!(vm.usd_for(0, 100.0), 0.0);
        assert_eq!(billed_vm_seconds(f64::NAN), 60.0);
        assert_eq!(billed_vm_seconds(3600.5), 3601.0);
    }
}
