"""The networks of Theano-MPI's benchmark table in PyTorch, layer for layer as theanompi's models build them
(``theanompi.models.alex_net``, ``.googlenet``, ``.lasagne_model_zoo.vgg16``, ``.resnet50``), for
``benchmarks/theanompi_table.py``. torchvision is not a dependency: its AlexNet and GoogLeNet differ from these.
"""

from __future__ import annotations


def alexnet(torch, n_classes: int = 1000):
    """AlexNet with LRN after conv1/conv2 and the two-group conv2/conv4/conv5 (96-256-384-384-256, fc 4096 x 2)."""
    nn = torch.nn

    def lrn():
        return nn.LocalResponseNorm(5, alpha=5e-4, beta=0.75, k=2.0)  # torch divides alpha by n: Lasagne's 1e-4

    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(), lrn(), nn.MaxPool2d(3, 2),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(), lrn(), nn.MaxPool2d(3, 2),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4096, n_classes))


def vgg16(torch, n_classes: int = 1000):
    """VGG-16 (configuration D), no batch norm, fc 4096 x 2 with dropout 0.5."""
    nn = torch.nn
    layers, c = [], 3
    for n_convs, width in zip((2, 2, 3, 3, 3), (64, 128, 256, 512, 512)):
        for _ in range(n_convs):
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU()]
            c = width
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4096, n_classes))


def resnet50(torch, n_classes: int = 1000):
    """ResNet-50 with bottleneck blocks, the stride on the 3x3 convolution (torchvision's v1.5)."""
    nn, F = torch.nn, torch.nn.functional

    def conv_bn(c_in, c_out, size, stride=1):
        return nn.Sequential(nn.Conv2d(c_in, c_out, size, stride, size // 2, bias=False), nn.BatchNorm2d(c_out))

    class Bottleneck(nn.Module):
        def __init__(self, c_in, width, stride):
            super().__init__()
            self.body = nn.Sequential(conv_bn(c_in, width, 1), nn.ReLU(), conv_bn(width, width, 3, stride), nn.ReLU(),
                                      conv_bn(width, 4 * width, 1))
            self.proj = conv_bn(c_in, 4 * width, 1, stride) if stride != 1 or c_in != 4 * width else None

        def forward(self, x):
            return F.relu(self.body(x) + (x if self.proj is None else self.proj(x)))

    layers, c = [conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)], 64
    for stage, n_blocks in enumerate((3, 4, 6, 3)):
        width = 64 * 2 ** stage
        for k in range(n_blocks):
            layers.append(Bottleneck(c, width, 2 if stage and k == 0 else 1))
            c = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, n_classes))


def googlenet(torch, n_classes: int = 1000):
    """GoogLeNet with both auxiliary classifiers (the training loss adds 0.3 x each), LRN, no batch norm."""
    nn = torch.nn
    inceptions = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
                  "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
                  "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
                  "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
                  "5b": (384, 192, 384, 48, 128, 128)}

    def conv(c_in, c_out, size, stride=1):
        return nn.Sequential(nn.Conv2d(c_in, c_out, size, stride, size // 2), nn.ReLU())

    class Inception(nn.Module):
        def __init__(self, c_in, n1, r3, n3, r5, n5, proj):
            super().__init__()
            self.branches = nn.ModuleList([
                conv(c_in, n1, 1), nn.Sequential(conv(c_in, r3, 1), conv(r3, n3, 3)),
                nn.Sequential(conv(c_in, r5, 1), conv(r5, n5, 5)),
                nn.Sequential(nn.MaxPool2d(3, 1, 1), conv(c_in, proj, 1))])
            self.out_channels = n1 + n3 + n5 + proj

        def forward(self, x):
            return torch.cat([b(x) for b in self.branches], dim=1)

    def aux(c_in):
        return nn.Sequential(nn.AvgPool2d(5, 3), conv(c_in, 128, 1), nn.Flatten(), nn.Linear(128 * 4 * 4, 1024),
                             nn.ReLU(), nn.Dropout(0.7), nn.Linear(1024, n_classes))

    class GoogLeNet(nn.Module):
        def __init__(self):
            super().__init__()
            lrn = nn.LocalResponseNorm(5, alpha=5e-4, beta=0.75, k=1.0)
            self.stem = nn.Sequential(conv(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), lrn, conv(64, 64, 1),
                                      conv(64, 192, 3), nn.LocalResponseNorm(5, alpha=5e-4, beta=0.75, k=1.0),
                                      nn.MaxPool2d(3, 2, 1))
            self.blocks, c = nn.ModuleDict(), 192
            for name, widths in inceptions.items():
                self.blocks[name] = Inception(c, *widths)
                c = self.blocks[name].out_channels
            self.pool = nn.MaxPool2d(3, 2, 1)
            self.aux1, self.aux2 = aux(512), aux(528)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.4), nn.Linear(c, n_classes))

        def forward(self, x):
            x, outputs = self.stem(x), []
            for name, block in self.blocks.items():
                if name in ("4a", "5a"):
                    x = self.pool(x)
                x = block(x)
                if self.training and name in ("4a", "4d"):
                    outputs.append((self.aux1 if name == "4a" else self.aux2)(x))
            return [self.head(x), *outputs]

    return GoogLeNet()


NETS = {"alexnet": alexnet, "googlenet": googlenet, "vgg16": vgg16, "resnet50": resnet50}
