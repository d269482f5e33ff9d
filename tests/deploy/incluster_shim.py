"""`python incluster_shim.py SA_DIR [podgpu args...]`: run podgpu as in a pod whose service
account is mounted at SA_DIR instead of /var/run/secrets/kubernetes.io/serviceaccount.

podgpu reads the token and CA from that fixed directory (podgpu.attribution.kubeapi); only they are redirected,
everything else (KUBERNETES_SERVICE_HOST/PORT, https, the bearer token, podgpu's own code) is
what runs in a cluster.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    sa_dir, args = sys.argv[1], sys.argv[2:]
    import podgpu.attribution.kubeapi as kubeapi

    kubeapi.SERVICE_ACCOUNT_DIR = os.path.abspath(sa_dir)  # token and ca.crt are read there
    from podgpu.cli import main as podgpu_main

    return podgpu_main(args)


if __name__ == "__main__":
    sys.exit(main())
