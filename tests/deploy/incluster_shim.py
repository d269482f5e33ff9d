"""`python incluster_shim.py SA_DIR [podgpu args...]`: run podgpu as in a pod whose service
account is mounted at SA_DIR instead of /var/run/secrets/kubernetes.io/serviceaccount.

The kubernetes client reads the token and CA from those fixed paths; only they are redirected,
everything else (KUBERNETES_SERVICE_HOST/PORT, https, the bearer token, podgpu's own code) is
what runs in a cluster.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    sa_dir, args = sys.argv[1], sys.argv[2:]
    import kubernetes.config.incluster_config as incluster

    incluster.SERVICE_TOKEN_FILENAME = os.path.join(sa_dir, "token")
    incluster.SERVICE_CERT_FILENAME = os.path.join(sa_dir, "ca.crt")
    from podgpu.cli import main as podgpu_main

    return podgpu_main(args)


if __name__ == "__main__":
    sys.exit(main())
