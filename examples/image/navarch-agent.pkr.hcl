# A GPU machine image with the navarch agent baked in (the recommended install path), for
# AWS (amazon-ebs) and GCP (googlecompute). Before `packer build`, from the navarch repo:
#   mkdir -p dist && navarch agent bundle --out dist/navarch-agent.pyz
#   cp examples/image/navarch-agent.service examples/image/navarch-agent.timer dist/
#   packer init examples/image && packer build -only='amazon-ebs.gpu' examples/image
# Then set the pool's image (aws.ami / gcp.image) to the result and `agent_baked: true`.
packer {
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = ">= 1.3.0"
    }
    googlecompute = {
      source  = "github.com/hashicorp/googlecompute"
      version = ">= 1.1.0"
    }
  }
}

variable "aws_region" {
  type    = string
  default = "us-east-1"
}

variable "aws_source_ami" {
  type        = string
  description = "A GPU base image with the NVIDIA driver, e.g. the AWS Deep Learning Base AMI."
  default     = ""
}

variable "gcp_project" {
  type    = string
  default = ""
}

variable "gcp_source_image_family" {
  type    = string
  default = "common-cu124-ubuntu-2204-nvidia-550"
}

variable "dist" {
  type        = string
  description = "Directory with navarch-agent.pyz, navarch-agent.service and navarch-agent.timer."
  default     = "dist"
}

source "amazon-ebs" "gpu" {
  region        = var.aws_region
  source_ami    = var.aws_source_ami
  instance_type = "g5.xlarge"
  ssh_username  = "ubuntu"
  ami_name      = "navarch-gpu-{{timestamp}}"
  metadata_options {
    http_tokens = "required"
  }
}

source "googlecompute" "gpu" {
  project_id          = var.gcp_project
  source_image_family = var.gcp_source_image_family
  source_image_project_id = ["deeplearning-platform-release"]
  zone                = "us-central1-a"
  machine_type        = "n1-standard-4"
  ssh_username        = "packer"
  image_name          = "navarch-gpu-{{timestamp}}"
}

build {
  sources = ["source.amazon-ebs.gpu", "source.googlecompute.gpu"]

  provisioner "file" {
    source      = "${var.dist}/"
    destination = "/tmp/navarch"
  }

  provisioner "file" {
    source      = "${path.root}/bake-agent.sh"
    destination = "/tmp/bake-agent.sh"
  }

  provisioner "shell" {
    inline = ["sudo sh /tmp/bake-agent.sh /tmp/navarch"]
  }
}
