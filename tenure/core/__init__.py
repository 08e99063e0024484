"""The backend-agnostic protocol: records, errors, validation, clocks, renewal, audit."""
